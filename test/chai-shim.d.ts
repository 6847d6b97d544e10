declare module "chai";
